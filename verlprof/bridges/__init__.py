"""Bridges into trainers that verlprof does not own: each one makes that trainer's own classes
drive verlprof's plan, controller and capture without a fork (``verlprof.bridges.verl``)."""

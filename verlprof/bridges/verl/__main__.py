"""``python -m verlprof.bridges.verl`` takes the arguments of ``python -m verl.trainer.main_ppo``
(Hydra overrides) and runs verl's trainer with verlprof profiling it."""

import sys

from verlprof.bridges.verl.launch import main

if __name__ == "__main__":
    sys.exit(main())

import sys

from grpo_trainer.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

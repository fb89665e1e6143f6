import sys

from pods.cli import main

if __name__ == "__main__":  # not when a spawned process imports it (pods compare)
    sys.exit(main())

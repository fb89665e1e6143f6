import sys

from pods.cli import main

sys.exit(main())

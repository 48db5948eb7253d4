import sys

from tdaot.cli import main

sys.exit(main())

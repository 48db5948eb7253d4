import sys

from tdaot.entry import main

sys.exit(main())

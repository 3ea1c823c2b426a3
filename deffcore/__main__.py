import sys

from deffcore.cli import main

sys.exit(main())

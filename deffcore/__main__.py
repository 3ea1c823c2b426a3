import sys

from deffcore.cli.main import main

sys.exit(main())

"""`python -m gateway.cli`: the laneserve command."""
import sys

from gateway.cli.main import main

sys.exit(main())

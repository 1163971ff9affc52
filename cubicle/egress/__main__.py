"""``python -m cubicle.egress``: the egress proxy (:func:`cubicle.egress.proxy.main`)."""

import sys

from cubicle.egress.proxy import main

sys.exit(main())

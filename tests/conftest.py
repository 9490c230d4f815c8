"""Every test runs without the user's calibration file: ``--reserve auto`` is the default of a GPU-derived budget
(issue 23), and a calibration entry on the machine running the tests would move the figures they pin.  Tests of
the calibration file set ``KVDASH_CALIBRATION`` themselves (tests/test_reserve.py)."""

import os
import tempfile

os.environ["KVDASH_CALIBRATION"] = os.path.join(tempfile.mkdtemp(prefix="kvdash-tests-"), "calibration.jsonl")

"""The confirmatory run (issue 58): its registration, written and committed before any of its
seeds ran (docs/registration/), the power that sized it (power), and the run of its seeds one by
one at the registered commit (``python -m ssmax.registration.run``; ``make confirm``)."""

"""The python test scripts' runner: each case runs, a failure is reported
and counted and the run goes on, and the last line is "N passed, N failed"
(what tests/run.sh reads). Scripts import it with the tests directory on
sys.path."""


def run_cases(cases):
    """cases: (name, fn, args) triples. Returns the exit code (1 if any failed)."""
    passed = failed = 0
    for name, fn, args in cases:
        try:
            fn(*args)
            passed += 1
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
            failed += 1
            print(f"FAIL {name}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0

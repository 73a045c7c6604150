#!/usr/bin/python3
# Runs rdma-core's pyverbs test suite (Debian's python3-pyverbs ships it in
# /usr/share/doc/rdma-core/tests; unpacked into SUITE_DIR) against one device, as its own
# run_tests.py does, and judges the result as issue 18 asks: no failure, no error, at least
# --min-pass tests passed, and every skip one of the known ones below -- a capability vrnic
# does not report. A skip with any other reason fails the run: it means a test gave up on
# something vrnic claims to do.
#
# Usage: pyverbs_suite.py SUITE_DIR --dev vrnic0 [--min-pass N] [--only PATTERN]
#        [other run_tests.py args]   (--only: the tests whose names hold PATTERN, unittest's -k)
# Prints unittest's verbose log, then one line "pyverbs: N run, N passed, N failed,
# N errors, N skipped" and the reasons of the skips by count. Exit status 0 only if it passed.
import collections
import os
import re
import sys
import unittest

# (test id pattern, skip reason pattern, why vrnic skips it)
KNOWN_SKIPS = [
    (r"\.test_mlx5_|\.test_efa", r".", "vendor-only tests (mlx5dv, efadv)"),
    (r".", r"Create QP type 8 is not supported|Create Raw Packet QP",
     "no raw packet QPs: raw_packet_caps is 0"),
    (r"\.test_parent_domain\.", r"^Parent Domain is not supported",
     "parent domains with custom allocators (EOPNOTSUPP: queues live in vrnicd's shared memory)"),
    (r"\.test_tag_matching\.", r"Extended CQ is not supported",
     "no hardware tag matching: tm_caps is 0 (IBV_WC_EX_WITH_TM_INFO refused)"),
    (r"dmabuf|cuda", r"dmabuf is not supported|cuda-python|PCI device must be passed",
     "needs a GPU / a PCI device this machine does not have"),
]


def main():
    if len(sys.argv) < 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__ or "usage: pyverbs_suite.py SUITE_DIR --dev DEV [--min-pass N]")
        return 2
    suite_dir = sys.argv[1]
    args = sys.argv[2:]
    min_pass = 0
    if "--min-pass" in args:
        i = args.index("--min-pass")
        min_pass = int(args[i + 1])
        del args[i:i + 2]
    only = []
    if "--only" in args:
        i = args.index("--only")
        only = ["-k", args[i + 1]]
        del args[i:i + 2]
    # The suite's own modules import each other by plain name, as when run from its folder.
    sys.path.insert(0, suite_dir)
    sys.argv = [os.path.join(suite_dir, "run_tests.py")] + args
    from args_parser import parser
    from importlib.machinery import SourceFileLoader
    tests = SourceFileLoader("tests", os.path.join(suite_dir, "__init__.py")).load_module()
    parser.parse_args()
    prog = unittest.main(module=tests, argv=[sys.argv[0]] + only, exit=False,
                         testRunner=unittest.TextTestRunner(verbosity=2, stream=sys.stdout))
    r = prog.result
    failed, errors, skipped = len(r.failures), len(r.errors), len(r.skipped)
    unexpected = len(r.unexpectedSuccesses)
    passed = r.testsRun - failed - errors - skipped - len(r.expectedFailures) - unexpected
    print(f"pyverbs: {r.testsRun} run, {passed} passed, {failed} failed, {errors} errors, "
          f"{skipped} skipped")
    ok = failed == 0 and errors == 0 and unexpected == 0
    by_reason = collections.Counter()
    for test, reason in r.skipped:
        why = next((w for t, p, w in KNOWN_SKIPS
                    if re.search(t, test.id()) and re.search(p, reason)), None)
        if why is None:
            print(f"UNEXPECTED SKIP: {test.id()}: {reason}")
            ok = False
        else:
            by_reason[why] += 1
    for why, n in by_reason.most_common():
        print(f"  skipped {n:3d}: {why}")
    if passed < min_pass:
        print(f"FAIL: {passed} passed, want at least {min_pass}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

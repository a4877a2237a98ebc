#!/usr/bin/python3
"""test_sanitizer_triage.py - which sanitizer reports fail the integration tests.

Against the sanitizer build every report from any process a test starts fails it
(tessera_testrun.py), but one kind: a small leak report whose every stack stops at OpenSSL's
allocator (openssl_exit_leak; docs/testing.md). This test holds that allowance to its letter
with the report that make test met (the CLI under test_tls, 2 December 2026) and the ways a
report may differ from it by a little: a frame of ours past OpenSSL, a block not from
libcrypto, a size past the bound, another sanitizer's error in the same process, a report cut
short. Each must fail the test run.
"""
import sys
import unittest

sys.dont_write_bytecode = True
import tessera_testrun as tr  # noqa: E402

MALLOC = ("    #0 0x7f7452cb89cf in __interceptor_malloc "
          "../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69\n")


def block(kind, size, objects, frame1, more=""):
    return ("%s leak of %d byte(s) in %d object(s) allocated from:\n%s%s%s\n"
            % (kind, size, objects, MALLOC, frame1, more))


ZALLOC = "    #1 0x7f744fa333e8 in CRYPTO_zalloc (/lib/x86_64-linux-gnu/libcrypto.so.3+0x2333e8)\n"
STRDUP = "    #1 0x7f744fa34ad5 in CRYPTO_strdup (/lib/x86_64-linux-gnu/libcrypto.so.3+0x234ad5)\n"
HEAD = ("=================================================================\n"
        "==tessera==21678==ERROR: LeakSanitizer: detected memory leaks\n\n")


def report(*blocks, total=10144):
    return (HEAD + "".join(blocks) +
            "SUMMARY: AddressSanitizer: %d byte(s) leaked in 56 allocation(s).\n" % total)


SEEN = report(block("Direct", 984, 3, ZALLOC), block("Indirect", 9056, 45, ZALLOC),
              block("Indirect", 27, 2, STRDUP))


class OpensslExitLeak(unittest.TestCase):
    def test_the_report_make_test_met_passes(self):
        self.assertTrue(tr.openssl_exit_leak(SEEN))

    def test_a_frame_past_openssl_fails(self):
        ours = "    #2 0x55d0c1 in ts_certs_init lib/sec/certs.c:120\n"
        self.assertFalse(tr.openssl_exit_leak(
            report(block("Direct", 984, 3, ZALLOC, ours), block("Indirect", 9056, 45, ZALLOC))))

    def test_a_block_not_from_libcrypto_fails(self):
        ours = "    #1 0x55d0c1 in ts_rows_batch_create lib/table/batch.c:40\n"
        self.assertFalse(tr.openssl_exit_leak(report(block("Direct", 984, 3, ZALLOC),
                                                     block("Direct", 64, 1, ours))))

    def test_a_leak_past_the_bound_fails(self):
        size = tr.OPENSSL_EXIT_LEAK_MAX - 983
        self.assertFalse(tr.openssl_exit_leak(report(block("Direct", 984, 3, ZALLOC),
                                                     block("Indirect", size, 45, ZALLOC))))
        self.assertTrue(tr.openssl_exit_leak(report(block("Direct", 984, 3, ZALLOC),
                                                    block("Indirect", size - 1, 45, ZALLOC))))

    def test_another_error_in_the_process_fails(self):
        for other in ("==21678==ERROR: AddressSanitizer: heap-use-after-free on address 0x6\n",
                      "lib/table/rows.c:12:5: runtime error: signed integer overflow\n"):
            self.assertFalse(tr.openssl_exit_leak(other + SEEN), other)

    def test_a_report_it_cannot_read_whole_fails(self):
        self.assertFalse(tr.openssl_exit_leak(HEAD + "Direct leak of 984 byte(s) in 3 "
                                              "object(s) allocated from:\n"))
        self.assertFalse(tr.openssl_exit_leak(HEAD))


if __name__ == "__main__":
    tr.main()

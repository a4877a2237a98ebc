"""tessera_cage.py - a memory cgroup for the processes a test starts: their memory, the page
cache of the files they read and write included, stays under a limit, so that a file larger
than it is read from the disk rather than from the machine's memory (test_big_table.py).
Root only; cgroup v1's or v2's memory controller. Kept apart from tessera_testlib, which
knows clusters, not the kernel's accounting."""
import os
import re
import time

from tessera_testlib import log


class MemoryCage:
    """A memory cgroup of its own, limited to `limit` bytes, for the processes a test starts
    in it (prefix()): their memory, the page cache of the files they read and write included,
    stays under the limit, so a file larger than it is read from the disk, not from memory
    (the machine's own memory would cache it). cgroup v1's memory controller
    (/sys/fs/cgroup/memory) or v2's (/sys/fs/cgroup with memory among its controllers);
    root only. `why_not` says why none could be made (then prefix() is empty: the processes
    run unbounded). close() removes it once its processes are gone."""

    def __init__(self, limit, name="tessera"):
        self.limit, self.path, self.why_not, self.v2 = limit, None, None, False
        base = "/sys/fs/cgroup/memory"
        if not os.path.isfile(os.path.join(base, "memory.limit_in_bytes")):
            base, self.v2 = "/sys/fs/cgroup", True
            try:
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    if "memory" not in f.read().split():
                        self.why_not = "no memory controller in %s" % base
                        return
            except OSError as e:
                self.why_not = "no cgroup memory controller: %s" % e
                return
        path = os.path.join(base, "%s-%d" % (name, os.getpid()))
        try:
            os.mkdir(path)
            self.path = path
            self._write("memory.max" if self.v2 else "memory.limit_in_bytes", str(limit))
        except OSError as e:
            self.close()
            self.why_not = "cannot make a memory cgroup in %s: %s" % (base, e)

    def _write(self, name, text):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(text)

    def _read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def prefix(self):
        """argv to put before a command so that it runs in the cage (its children too)."""
        if not self.path:
            return []
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path]

    def pids(self):
        return [int(x) for x in self._read("cgroup.procs").split()]

    def read_bytes(self, comm):
        """Bytes the cage's live processes named comm made the storage layer read (their
        /proc/PID/io read_bytes: from the device, not from the page cache)."""
        total = 0
        for pid in self.pids():
            try:
                with open("/proc/%d/comm" % pid) as f:
                    if f.read().strip() != comm:
                        continue
                with open("/proc/%d/io" % pid) as f:
                    total += int(re.search(r"^read_bytes: (\d+)", f.read(), re.M).group(1))
            except (OSError, AttributeError):
                pass
        return total

    def peak(self):
        """The most memory the cage held at once (bytes), page cache included, or None."""
        try:
            return int(self._read("memory.peak" if self.v2 else "memory.max_usage_in_bytes"))
        except OSError:
            return None

    def oom_kills(self):
        """Processes the kernel killed for the cage's limit."""
        text = self._read("memory.events" if self.v2 else "memory.oom_control")
        m = re.search(r"^oom_kill (\d+)", text, re.M)
        return int(m.group(1)) if m else 0

    def close(self):
        """Removes the cgroup, waiting up to 10 s for its processes to be gone."""
        if not self.path:
            return
        deadline = time.monotonic() + 10
        while True:
            try:
                os.rmdir(self.path)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    log("memory cgroup %s not removed: %s" % (self.path, e))
                    break
                time.sleep(0.1)
        self.path = None

"""tessera._progress - tessera.torch's progress reports to the master (``ps.report``,
``ps.step(loss=)``; docs/launch.md, "Watching a job"): what ``tessera status``, the master's
status page and its ``tessera_job_*`` gauges show of a PyTorch job."""
import time

from tessera._state import _invalid

#: Seconds between two progress reports to the master (ParameterServer.report).
PROGRESS_S = 1.0


class Progress:
    """ParameterServer's reports (a mixin: it uses the ParameterServer's client and batch)."""

    def _start_progress(self):
        """What the next report averages, and when the last left."""
        self._loss_sum, self._loss_n, self._accuracy = 0.0, 0, float("nan")
        self._samples, self._reported = 0, time.monotonic()

    def report(self, loss=None, accuracy=None):
        """Training progress for the master (``tessera status``, its status page, the
        dashboard; docs/observability.md): ``loss`` (a number or a one-element tensor) is
        averaged over the calls until the next report, ``accuracy`` (0..1) is the latest. The
        reports leave with the steps, at most one a second, with the samples per second of
        the global batch; every rank may report, rank 0's is plotted. ``step(loss=...)``
        calls it."""
        if loss is not None:
            self._loss_sum += float(loss)
            self._loss_n += 1
        if accuracy is not None:
            accuracy = float(accuracy)
            if not 0 <= accuracy <= 1:
                raise _invalid("accuracy: %r; a fraction in 0..1 expected" % accuracy)
            self._accuracy = accuracy

    def _progress(self):
        """After a step: its samples counted, and a report to the master once a second."""
        now = time.monotonic()
        self._samples += self.batch or 0
        if now - self._reported < PROGRESS_S:
            return
        nan = float("nan")
        rate = self._samples / (now - self._reported) if self._samples else nan
        self.client.report_progress(self._loss_sum / self._loss_n if self._loss_n else nan,
                                    self._accuracy, rate)
        self._reported, self._samples, self._loss_sum, self._loss_n = now, 0, 0.0, 0

"""tessera._elastic - tessera.torch's elastic jobs (``attach(elastic=True)``; docs/elastic.md,
docs/python.md "Elastic jobs").

A job of W ranks has W slots; slot k is the share of every global batch that rank k computes
when nothing fails. When a rank dies, its slots go to the live ranks until it comes back, so
the job goes on, and in exact mode on the bits of a run where nothing happened. The trainer
computes whatever slots ``ps.slots()`` names::

    while ps.version <= steps:
        for slot in ps.slots():                 # [rank] unless a rank died
            for x, y in micro_batches(ps.version - 1, slot):
                model.zero_grad()
                F.cross_entropy(model(x), y).backward()
                ps.accumulate(slot=slot)
        try:
            ps.step()
        except tessera.Slots:                   # the slots changed hands: the module holds
            continue                            # ps.version's values; compute again

With tessera.torch.EmbeddingBag tables, every EmbeddingBag's ``step`` is set to ``ps.version``
before each step, each slot's rows are pushed as that slot after its passes
(``emb.push(slot=slot)``), and a table call (a forward's pull, a push) may raise tessera.Slots
too: the whole step goes in the ``try``, and ``except tessera.Slots`` calls ``ps.recover()``
(the step to compute; the module holds its values) and every EmbeddingBag's ``discard()``
(python/examples/ctr_torch.py ``--elastic``).

Every rank starts with ``Client.join``: every tensor at the job's newest step, so a rank
started again (``tessera run --respawn``) or late takes the job where its live ranks are. What
an elastic job cannot have: the model's own weights as its start (that is an assignment step,
which needs fixed ranks: pass ``init=``, Tessera's initializers, the same bits on every rank),
overlap, zero-copy buffers, frozen parameters and broadcast buffers (their assignments come
from rank 0 each step, and a dead rank 0 would leave none), and clipping (refused by the SDK).
"""
import tessera
from tessera._state import _invalid


class Elastic:
    """ParameterServer's elastic half (a mixin: it uses the ParameterServer's fields)."""

    def _check_elastic(self, overlap, buffers):
        """Refuses, by name, what an elastic job cannot have (module doc)."""
        if not self.elastic:
            return
        frozen = [n for n, p in zip(self.names, self.params) if not p.requires_grad]
        for bad, why in ((overlap is not False, "overlap"),
                         (buffers, "buffers=True (zero copy)"),
                         (bool(self._bufs), "the module's buffers %s with broadcast_buffers "
                          "(pass broadcast_buffers=False: each rank keeps its own)"
                          % [b.name for b in self._bufs][:4]),
                         (bool(frozen), "frozen parameters %s" % frozen[:4])):
            if bad:
                raise _invalid("elastic: not with %s; an elastic job's steps are the slots' "
                               "gradients alone (docs/python.md, \"Elastic jobs\")" % why)

    def _join(self):
        """Every tensor at the job's newest step, into the module: 0 for a job that starts
        now, else the step its live ranks reached (a rank started again, or late)."""
        self.version = self.client.join(self._outs())

    def slots(self):
        """The slots this rank computes for step ``self.version``: its rank alone, unless a
        rank died (its slot is then a live rank's until it comes back). Not elastic: [rank]."""
        return self.client.slots() if self.elastic else [self.rank]

    def recover(self):
        """After tessera.Slots from a table call (an EmbeddingBag's forward or push of step
        ``self.version``): asks the master for this rank's slots and the step to compute,
        puts it in ``self.version`` (the module holds its values: the same step's, or, for a
        rank the job went on without, a later one's, pulled) and returns it; what was
        accumulated of the abandoned step is dropped. After step() raised tessera.Slots it
        had done this; calling it again changes nothing."""
        if not self.elastic:
            raise _invalid("recover: this job is not elastic (attach with elastic=True); no "
                           "slot changes hands")
        self._slot_sums = {}
        self.version = self.client.elastic_recover(self.version, self._outs())
        return self.version

    def _accumulate_slot(self, slot, factor):
        """accumulate() into slot's own sums."""
        if not isinstance(slot, int) or isinstance(slot, bool) or \
                not 0 <= slot < self.workers:
            raise _invalid("slot: a rank 0..%d expected, got %r" % (self.workers - 1, slot))
        self._acc, self._pending = self._slot_sums.get(slot, (None, False))
        try:
            self._accumulate(factor)
        finally:
            self._slot_sums[slot] = (self._acc, self._pending)
            self._acc, self._pending = None, False

    def _step_elastic(self, local_batch):
        """step() of an elastic job: each slot's sums, or p.grad as this rank's slot."""
        if not self._slot_sums:
            self._accumulate_slot(self.rank, self._share(local_batch))
        elif local_batch is not None:
            raise _invalid("local_batch: give it to accumulate(), which already summed this "
                           "step's gradients")
        slots = sorted(self._slot_sums)
        sums = [self._slot_sums[s][0] for s in slots]
        self._slot_sums = {}
        try:
            self.client.step_slots(self.version, slots, sums, self._outs())
        except (tessera.Slots, tessera.Rollback):
            self.version = self.client.resume_step   # the module holds its values
            raise
        self.version += 1
        return self.version

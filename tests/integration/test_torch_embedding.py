#!/usr/bin/python3
"""test_torch_embedding.py - tessera.torch.EmbeddingBag behaves as torch.nn.EmbeddingBag over
rows held by Tessera (python/tessera/_embedding.py; docs/embeddings.md,
"tessera.torch.EmbeddingBag"; issue 46).

In-process, against a local run's Client (master "local": the shards' code in this process,
one worker, SGD): the assertions read what was pulled and pushed through Recorder, which wraps
the Client's table methods.

Checked: forward equals torch.nn.EmbeddingBag holding the same rows (to the last place) for
modes sum and mean over 2-D input, 1-D input with offsets, include_last_offset, per_sample_weights,
padding_idx, empty bags and repeated ids, in training and in eval, pulling each unique id once
and never padding or ids outside every bag; backward pushes one gradient row per input position
(the analytic bag gradient times the weight, or over the bag's count), whose sums per id are
torch's weight.grad rows (sparse=False and sparse=True alike), nothing for rows the batch did
not use, torch's per_sample_weights.grad, and micro-batches pushed as one step; SGD steps
through the table (a step without a forward pushing zero ids) equal torch.optim.SGD on the same
EmbeddingBag, with the local_batch convention of tessera.torch; eval and no_grad passes pull
the current version and push nothing; each bad argument is refused by name before anything is
pulled.

Environment (ctest sets it): PYTHONPATH with build/python and build/gen/python.
"""
import sys
import unittest
import zlib

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

import numpy as np  # noqa: E402
import tessera  # noqa: E402
import tessera.torch  # noqa: E402
import torch  # noqa: E402


def client(batch, lr, exact=False):
    """A local run's Client: the shards' code in this process, one worker, SGD."""
    return tessera.Client(master="local", workers=1, rank=0, batch=batch, exact=exact,
                          optimizer="sgd:lr=%r" % lr)


class Recorder:
    """Wraps a client; keeps a copy of every pull_rows and push_rows call."""

    def __init__(self, client):
        self.client = client
        self.pulls, self.pushes, self.prefetches = [], [], []

    def register_table(self, *a, **kw):
        return self.client.register_table(*a, **kw)

    def pull_rows(self, table, version, ids, out):
        self.pulls.append((table, version, np.array(ids, np.int64)))
        return self.client.pull_rows(table, version, ids, out)

    def prefetch_rows(self, table, ids):
        self.prefetches.append((table, np.array(ids, np.int64)))
        return self.client.prefetch_rows(table, ids)

    def push_rows(self, table, step, ids, grads):
        self.pushes.append((table, step, np.array(ids, np.int64),
                            np.array(grads, np.float32)))
        return self.client.push_rows(table, step, ids, grads)

    def close(self):
        if hasattr(self.client, "close"):
            self.client.close()

    def __getattr__(self, name):   # the rest (rank, workers, elastic, ...) as the client's
        return getattr(self.client, name)


N, DIM = 12, 5


def cases():
    """(label, input, offsets, per_sample_weights, padding_idx, include_last_offset)."""
    g = torch.Generator().manual_seed(7)
    one = torch.tensor([3, 7, 3, 3, 0, 11, 7, 2, 9], dtype=torch.int64)   # repeats
    w = torch.rand(one.shape, generator=g) + 0.5
    two = torch.tensor([[1, 4, 4], [6, 6, 6], [10, 2, 8], [4, 0, 1]])
    return [
        ("2-D", two, None, None, None, False),
        ("2-D psw", two, None, torch.rand(two.shape, generator=g) + 0.5, None, False),
        ("2-D padding", two, None, None, 6, False),   # a bag of padding only: zeros
        ("2-D last offset", two, None, None, None, True),   # torch drops the last row's bag
        ("1-D", one, torch.tensor([0, 2, 2, 5, 9]), None, None, False),   # empty bags
        ("1-D int32", one.int(), torch.tensor([0, 4, 7], dtype=torch.int32), None, None,
         False),
        ("1-D psw", one, torch.tensor([0, 3, 3, 6]), w, None, False),
        ("1-D padding", one, torch.tensor([0, 3, 6]), None, 3, False),
        ("1-D negative padding", one, torch.tensor([0, 3, 6]), None, -5, False),   # id 7
        ("1-D padding psw", one, torch.tensor([0, 3, 6]), w, 3, False),
        ("1-D last offset", one, torch.tensor([0, 2, 2, 6]), None, None, True),  # 6.. in none
        ("1-D last offset psw", one, torch.tensor([0, 4, 7]), w, 7, True),
        ("1-D empty", torch.tensor([], dtype=torch.int64), torch.tensor([0, 0]), None, None,
         False),
    ]


def used_positions(inp, offsets, pad, last):
    """The positions of inp that are in a bag and not padding, and each one's bag (torch's
    rules, computed here independently of the module)."""
    flat = inp.reshape(-1).long()
    if inp.dim() == 2:
        offsets = torch.arange(0, flat.numel(), inp.shape[1])
    offsets = offsets.long().tolist()
    starts, end = (offsets[:-1], offsets[-1]) if last else (offsets, flat.numel())
    out = []
    for b, s in enumerate(starts):
        e = starts[b + 1] if b + 1 < len(starts) else end
        for j in range(s, e):
            if pad is None or int(flat[j]) != pad % N:
                out.append((j, b))
    return out


def without_last_offset(inp, offsets, psw, last):
    """The same bags as 1-D input and offsets without include_last_offset. torch 1.13 gets
    include_last_offset wrong outside mode sum's forward: mean divides the last bag by the
    positions up to the input's end, not to the last offset, and backward gives positions after
    the last offset garbage (sparse=True raises), so torch is compared in this form."""
    flat = inp.reshape(-1)
    if inp.dim() == 2:
        offsets = torch.arange(0, flat.numel(), inp.shape[1])
    if not last:
        return flat, offsets, None if psw is None else psw.reshape(-1)
    end = int(offsets[-1])
    return flat[:end], offsets[:-1], None if psw is None else psw.reshape(-1)[:end]


class EmbeddingBagTest(unittest.TestCase):

    def make(self, mode="sum", batch=4, lr=0.5, **kw):
        rec = Recorder(client(batch, lr))
        self.addCleanup(rec.close)
        kw.setdefault("init", "normal:1")
        emb = tessera.torch.EmbeddingBag(rec, "emb", N, DIM, mode=mode, **kw)
        return rec, emb

    def reference(self, emb, mode, pad, last, sparse=False):
        ref = torch.nn.EmbeddingBag(N, DIM, mode=mode, padding_idx=pad,
                                    include_last_offset=last, sparse=sparse)
        with torch.no_grad():
            ref.weight.copy_(emb.weight_rows(torch.arange(N)))
        return ref

    def test_forward_equals_torch(self):
        """Every case, both modes, training and eval: torch.nn.EmbeddingBag's result with
        the same rows; the pull is of the unique used ids at version 0; and the other mode
        gives something else, so the comparison tells sum from mean."""
        for label, inp, offsets, psw, pad, last in cases():
            for mode in ("sum", "mean"):
                if psw is not None and mode == "mean":
                    continue
                with self.subTest(case=label, mode=mode):
                    rec, emb = self.make(mode, padding_idx=pad, include_last_offset=last)
                    want = self.reference(emb, mode, pad, False)(
                        *without_last_offset(inp, offsets, psw, last))
                    if last and mode == "sum" and psw is None:   # torch's own, where right
                        torch.testing.assert_close(
                            self.reference(emb, mode, pad, True)(inp, offsets), want,
                            rtol=0, atol=0)
                    flat = inp.reshape(-1)
                    used = sorted({int(flat[j]) for j, _ in used_positions(inp, offsets, pad,
                                                                           last)})
                    for train in (True, False):
                        emb.train(train)
                        rec.pulls.clear()
                        got = emb(inp, offsets, psw)
                        self.assertEqual(got.shape, want.shape)
                        # torch picks its kernel by padding_idx and weights: the bits of
                        # a weighted sum may differ in the last place.
                        torch.testing.assert_close(got, want.detach(), rtol=2e-7, atol=1e-7)
                        self.assertEqual(got.requires_grad, train)
                        if used:
                            self.assertEqual(len(rec.pulls), 1)
                            self.assertEqual(rec.pulls[0][1], 0)
                            self.assertEqual(rec.pulls[0][2].tolist(), used)
                        else:
                            self.assertEqual(rec.pulls, [])
                    if psw is None and max(len(b) for b in self.bags(inp, offsets, pad,
                                                                     last)) > 1:
                        other = self.reference(emb, "mean" if mode == "sum" else "sum", pad,
                                               last)(inp, offsets)
                        self.assertFalse(torch.allclose(other, want))
                    emb.discard()

    def bags(self, inp, offsets, pad, last):
        out = {}
        for j, b in used_positions(inp, offsets, pad, last):
            out.setdefault(b, []).append(j)
        return list(out.values()) or [[]]

    def test_backward_pushes_per_position(self):
        """loss.backward() then push(): one row per used position, equal to the bag's gradient
        times the weight (sum) or over the bag's count (mean); summed per id they are torch's
        weight.grad, dense or sparse; unused rows get nothing; per_sample_weights.grad is
        torch's; step 0 pushed, emb.step then 1."""
        g = torch.Generator().manual_seed(3)
        for label, inp, offsets, psw, pad, last in cases():
            for mode in ("sum", "mean"):
                if psw is not None and mode == "mean":
                    continue
                with self.subTest(case=label, mode=mode):
                    rec, emb = self.make(mode, padding_idx=pad, include_last_offset=last,
                                         loss_reduction="sum")
                    refs = [self.reference(emb, mode, pad, False, sparse=s)
                            for s in (False, True)]
                    r_inp, r_off, r_psw = without_last_offset(inp, offsets, psw, last)
                    p1 = psw.clone().requires_grad_(True) if psw is not None else None
                    out = emb(inp, offsets, p1)
                    target = torch.randn(out.shape, generator=g)
                    (out * target).sum().backward()
                    grads = []
                    for ref in refs:
                        p2 = r_psw.clone().requires_grad_(True) if psw is not None else None
                        (ref(r_inp, r_off, p2) * target).sum().backward()
                        grads.append(ref.weight.grad.to_dense())
                        if psw is not None:
                            torch.testing.assert_close(p1.grad.reshape(-1)[:p2.numel()],
                                                       p2.grad)
                            self.assertTrue(bool((p1.grad.reshape(-1)[p2.numel():] == 0)
                                                 .all()))
                    torch.testing.assert_close(grads[0], grads[1])
                    self.assertEqual(emb.push(), 1)
                    self.assertEqual(emb.step, 1)
                    self.assertEqual(len(rec.pushes), 1)
                    _, step, ids, pushed = rec.pushes[0]
                    self.assertEqual(step, 0)
                    pushed = pushed.reshape(-1, DIM)
                    pos = used_positions(inp, offsets, pad, last)
                    flat = inp.reshape(-1).long()
                    self.assertEqual(ids.tolist(), [int(flat[j]) for j, _ in pos])
                    count = {}
                    for _, b in pos:
                        count[b] = count.get(b, 0) + 1
                    for k, (j, b) in enumerate(pos):
                        want = target[b].clone()
                        if psw is not None:
                            want *= psw.reshape(-1)[j]
                        if mode == "mean":
                            want /= count[b]
                        torch.testing.assert_close(torch.from_numpy(pushed[k]), want)
                    summed = torch.zeros(N, DIM)
                    summed.index_add_(0, torch.from_numpy(ids), torch.from_numpy(pushed))
                    torch.testing.assert_close(summed, grads[0])
                    untouched = sorted(set(range(N)) - set(ids.tolist()))
                    self.assertTrue(bool((grads[0][untouched] == 0).all()))

    def test_micro_batches_push_once(self):
        """Two forward/backward passes in one step are one push, each position's row in it;
        a forward whose loss is not backpropagated adds nothing."""
        rec, emb = self.make("mean", loss_reduction="sum")
        a, b = torch.tensor([[1, 2], [2, 3]]), torch.tensor([5, 1, 1])
        emb(a).sum().backward()
        emb(b, torch.tensor([0, 1])).sum().backward()
        emb(torch.tensor([[9, 9]]))          # not backpropagated
        emb.push()
        self.assertEqual(len(rec.pushes), 1)
        self.assertEqual(rec.pushes[0][2].tolist(), [1, 2, 2, 3, 5, 1, 1])
        self.assertEqual(rec.pushes[0][3].reshape(-1, DIM).tolist(),
                         [[0.5] * DIM] * 4 + [[1.0] * DIM] + [[0.5] * DIM] * 2)

    def test_sgd_steps_equal_torch(self):
        """Three steps of a mean loss over B bags (pushed with local_batch=B, the shards
        dividing by the batch B): the rows equal torch.optim.SGD's on the same EmbeddingBag;
        a step without a forward pushes zero ids and changes nothing."""
        B, lr = 4, 0.5
        for mode in ("sum", "mean"):
            with self.subTest(mode=mode):
                rec, emb = self.make(mode, batch=B, lr=lr, padding_idx=0, local_batch=B)
                ref = self.reference(emb, mode, 0, False)
                opt = torch.optim.SGD(ref.parameters(), lr=lr)
                before = ref.weight.detach().clone()
                g = torch.Generator().manual_seed(11)
                for step in range(4):
                    if step == 2:                    # this step's batch skips the table
                        emb.push()
                        self.assertEqual(rec.pushes[-1][2].size, 0)
                        continue
                    inp = torch.randint(0, N, (B, 3), generator=g)
                    target = torch.randn(B, DIM, generator=g)
                    for m in (emb, ref):
                        loss = ((m(inp) - target) ** 2).sum(1).mean()
                        loss.backward()
                    emb.push()
                    opt.step()
                    opt.zero_grad()
                self.assertEqual(emb.step, 4)
                self.assertEqual([p[1] for p in rec.pushes], [0, 1, 2, 3])
                got = emb.weight_rows(torch.arange(N))
                self.assertEqual(rec.pulls[-1][1], 4)
                torch.testing.assert_close(got, ref.weight.detach(), rtol=0, atol=2e-6)
                self.assertFalse(torch.allclose(got, before, atol=0.05))
                torch.testing.assert_close(got[0], before[0], rtol=0, atol=0)   # padding

    def test_local_batch_scales_the_push(self):
        """Under loss_reduction "mean" the gradient is multiplied by local_batch (push's over
        the constructor's), and without either the push is refused by name, nothing sent."""
        rec, emb = self.make("sum", local_batch=3)
        inp = torch.tensor([[4, 5]])
        emb(inp).sum().backward()
        emb.push()
        self.assertEqual(rec.pushes[0][3].tolist(), [3.0] * 2 * DIM)
        emb(inp).sum().backward()
        emb.push(local_batch=2)
        self.assertEqual(rec.pushes[1][3].tolist(), [2.0] * 2 * DIM)
        rec, emb = self.make("sum")
        emb(inp).sum().backward()
        with self.assertRaisesRegex(tessera.InvalidArgument, "local_batch"):
            emb.push()
        self.assertEqual((rec.pushes, emb.step), ([], 0))
        emb.push(local_batch=1)
        self.assertEqual(rec.pushes[0][3].tolist(), [1.0] * 2 * DIM)

    def test_eval_pulls_and_never_pushes(self):
        """eval() and torch.no_grad(): the current version pulled, nothing kept for push, the
        step unchanged; push() after them sends zero ids."""
        rec, emb = self.make("mean", loss_reduction="sum", batch=1, lr=1.0)
        inp = torch.tensor([[1, 2, 3]])
        emb(inp).sum().backward()
        emb.push()
        self.assertEqual(emb.step, 1)
        emb.eval()
        out = emb(inp)
        self.assertFalse(out.requires_grad)
        emb.train()
        with torch.no_grad():
            emb(inp)
        self.assertEqual(emb.step, 1)
        self.assertEqual(len(rec.pushes), 1)
        self.assertEqual([p[1] for p in rec.pulls], [0, 1, 1])
        torch.testing.assert_close(out, emb.weight_rows([1, 2, 3]).mean(0, keepdim=True))
        emb.push()
        self.assertEqual((rec.pushes[1][1], rec.pushes[1][2].size, rec.pushes[1][3].size),
                         (1, 0, 0))

    def test_prefetch_announces_the_unique_ids(self):
        """prefetch(next batch): its unique ids, padding left out, go to prefetch_rows (a hint
        the local run takes without a disk tier); nothing pulled or pushed, the step and the
        next forward unchanged; an id past the table is refused by name."""
        rec, emb = self.make("sum", padding_idx=0)
        inp = torch.tensor([[4, 0, 4, 9], [9, 1, 0, 2]])
        before = emb(inp).detach()
        emb.discard()
        emb.prefetch(inp)
        self.assertEqual(len(rec.prefetches), 1)
        self.assertEqual(rec.prefetches[0][1].tolist(), [1, 2, 4, 9])
        self.assertEqual(len(rec.pulls), 1)
        self.assertEqual(emb.step, 0)
        torch.testing.assert_close(emb(inp).detach(), before, rtol=0, atol=0)
        with self.assertRaisesRegex(tessera.InvalidArgument, "max_id|outside"):
            emb.prefetch(torch.tensor([N]))

    def test_bad_arguments_are_refused_by_name(self):
        """What torch refuses (and what a table cannot do) raises InvalidArgument naming the
        argument, before anything is pulled or pushed."""
        rec, emb = self.make("mean", loss_reduction="sum")
        one, off = torch.tensor([1, 2, 3]), torch.tensor([0, 1])
        bad_new = [
            (dict(mode="max"), "mode: 'max' is not supported"),
            (dict(mode="avg"), "mode:"),
            (dict(padding_idx=N), "padding_idx"),
            (dict(padding_idx=-N - 1), "padding_idx"),
            (dict(padding_idx=1.0), "padding_idx"),
            (dict(include_last_offset=1), "include_last_offset"),
            (dict(loss_reduction="avg"), "loss_reduction"),
            (dict(local_batch=-1), "local_batch"),
            (dict(step=-1), "step"),
        ]
        for kw, msg in bad_new:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaisesRegex(tessera.InvalidArgument, msg):
                    tessera.torch.EmbeddingBag(rec, "bad", N, DIM, **kw)
        for args, msg in (((0, DIM), "num_embeddings"), ((N, 0), "embedding_dim"),
                          ((True, DIM), "num_embeddings")):
            with self.assertRaisesRegex(tessera.InvalidArgument, msg):
                tessera.torch.EmbeddingBag(rec, "bad", *args)
        last = tessera.torch.EmbeddingBag(rec, "last", N, DIM, mode="sum",
                                          include_last_offset=True)
        bad_call = [
            (emb, (one.reshape(1, 3), off), "offsets: with 2-D input"),
            (emb, (one,), "offsets: with 1-D input"),
            (emb, (one, off.reshape(1, 2)), "offsets: a 1-D"),
            (emb, (one, off.float()), "offsets: a 1-D"),
            (emb, (one, torch.tensor([1, 2])), r"offsets: offsets\[0\] has to be 0"),
            (emb, (one, torch.tensor([0, 2, 1])), "offsets: bag starts must not decrease"),
            (emb, (one, torch.tensor([0, 4])), r"offsets: offsets\[-1\]"),
            (last, (one, torch.tensor([], dtype=torch.int64)), "offsets: include_last_offset"),
            (emb, (torch.tensor([1, N]), off), "input: id 12 at position 1"),
            (emb, (torch.tensor([-1, 2]), off), "input: id -1 at position 0"),
            (emb, (one.float(), off), "input: int64 or int32"),
            (emb, (one.reshape(1, 1, 3),), "input: a 1-D"),
            (emb, ([1, 2], off), "input: a torch tensor"),
            (emb, (one, off, torch.ones(3)), "per_sample_weights: only supported for "
                                             "mode='sum'"),
            (last, (one, torch.tensor([0, 3]), torch.ones(2)), "per_sample_weights: shape"),
            (last, (one, torch.tensor([0, 3]), torch.ones(3, dtype=torch.int64)),
             "per_sample_weights: a float"),
        ]
        for m, args, msg in bad_call:
            with self.subTest(msg=msg):
                with self.assertRaisesRegex(tessera.InvalidArgument, msg):
                    m(*args)
        for ids, msg in (([N], "ids: id 12"), (torch.tensor([0.5]), "ids: integer")):
            with self.assertRaisesRegex(tessera.InvalidArgument, msg):
                emb.weight_rows(ids)
        with self.assertRaisesRegex(tessera.InvalidArgument, "local_batch"):
            emb.push(local_batch=-2)
        for slot, msg in ((1, r"slot: a rank 0\.\.0 expected, got 1"), (-1, "slot: a rank"),
                          ("0", "slot: a rank"), (True, "slot: a rank")):
            with self.assertRaisesRegex(tessera.InvalidArgument, msg):
                emb.push(slot=slot)
        self.assertEqual((rec.pulls, rec.pushes, emb.step), ([], [], 0))

    def test_exported(self):
        self.assertIn("EmbeddingBag", tessera.torch.__all__)
        rec, emb = self.make("sum")
        self.assertEqual((emb.table, emb.step), (0, 0))
        self.assertEqual(list(emb.parameters()), [])   # the rows are the shards'
        _, resumed = self.make("sum", step=7)
        self.assertEqual(resumed.step, 7)


if __name__ == "__main__":
    tl.main()

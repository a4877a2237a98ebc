"""tessera - the Python binding of the Tessera parameter server's C SDK (include/tessera.h).

A trainer connects to a cluster (or runs the shards' code in-process with master "local"),
registers its tensors, and then, step after step, pushes the gradient SUM of its share of the
global batch and pulls the parameters the shards produced::

    import numpy as np, tessera

    with tessera.Client(master="127.0.0.1:7070", job="demo", rank=0, workers=2,
                        optimizer="momentum:lr=0.05", batch=64) as c:
        w = c.register("w", (256, 784), init="he", seed=1, fan_in=784, fan_out=256)
        params = np.empty(c.numel(w), np.float32)
        c.pull(w, 0, params)                      # version 0: the initial values
        for step in range(100):
            grad = ...                            # float32, c.numel(w) elements
            c.step(step, [grad], [params])        # push step, pull version step + 1

Arrays are never copied: every array argument goes through the buffer protocol and must be
C-contiguous with the right dtype (float32; int64 for exact-mode gradients) and exactly
numel elements; outputs must be writable. NumPy arrays work as they are; a CPU torch tensor
is viewed through its zero-copy ``.detach().numpy()``. Anything else raises
tessera.InvalidArgument naming the argument before anything is sent.

``Client.buffers(id)`` goes one step further: (params, grad), NumPy arrays over the SDK's own
memory for the tensor. Pulled into, params needs no copy at all (on one host its pages are the
shard's own, read-only); pushed, grad is read by the shards on this host where it lies. They
keep the Client alive, and close() keeps their memory mapped until the last is freed.

Every failure raises tessera.Error, with ``code`` (the gRPC status name: INVALID_ARGUMENT,
NOT_FOUND, FAILED_PRECONDITION, ABORTED, DEADLINE_EXCEEDED, UNAVAILABLE, ...), ``grpc_code``
(its number) and ``message``; bad input raises the subclass tessera.InvalidArgument, which is
also a ValueError. A step the cluster took back to its last snapshot raises tessera.Rollback
(a tessera.Error): the params hold that step's values; train on from Client.resume_step. A
step of an elastic job (elastic=True) whose slots changed hands raises tessera.Slots the
same way: compute the slots Client.slots() names for Client.resume_step, and step again.
SDK calls release the GIL; one Client serialises its own calls.

``tessera.torch`` attaches a ``torch.nn.Module`` to a cluster (docs/python.md).
"""
import pkgutil

# build/gen/python holds the generated gRPC messages under the same name (tessera.v1, used by
# the tests' gRPC clients): let both live in one package.
__path__ = pkgutil.extend_path(__path__, __name__)

from tessera._tessera import (  # noqa: E402,F401
    LOSS_SCALE_CALLER,
    LOSS_SCALE_NONE,
    LOSS_SCALE_SDK,
    Client,
    Error,
    InvalidArgument,
    Rollback,
    Slots,
    fixed_add,
    fixed_add_f32,
    launch_env,
    options,
    to_fixed,
)

__all__ = ["Client", "Error", "InvalidArgument", "Rollback", "Slots", "to_fixed", "fixed_add",
           "fixed_add_f32", "launch_env", "options", "LOSS_SCALE_NONE", "LOSS_SCALE_SDK",
           "LOSS_SCALE_CALLER", "FIXED_ONE", "torch"]

# The click-log generator (docs/embeddings.md): in the tree's build only, a package pip
# builds against the installed SDK has none.
try:
    from tessera._tessera import (  # noqa: E402,F401
        ctr_auc,
        ctr_holdout,
        ctr_logloss,
        ctr_optimum,
        ctr_samples,
    )
    __all__ += ["ctr_samples", "ctr_holdout", "ctr_auc", "ctr_logloss", "ctr_optimum"]
except ImportError:
    pass

#: fixed(1.0): exact mode's int64 values carry 32 fraction bits (docs/exact-mode.md).
FIXED_ONE = 1 << 32


def __getattr__(name):
    """``tessera.torch`` is imported on first use: importing torch takes a second or two, and
    a NumPy trainer does not need it."""
    if name == "torch":
        import importlib
        return importlib.import_module("tessera.torch")
    raise AttributeError("module 'tessera' has no attribute %r" % (name,))

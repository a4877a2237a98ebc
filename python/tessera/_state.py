"""tessera._state - the pieces of a module's state around its parameters, for tessera.torch:
the buffers kept equal across ranks (_Buffer), the module's load_state_dict routed through the
job while attached (_RoutedLoad), and the job's optimizer as torch sees one (Optimizer, for
param groups and lr schedulers), with the optimizer spec's defaults and state length; and the
errors tessera.torch raises."""
import numpy as np
import torch

import tessera

#: Integer buffers travel as float32: exact up to this magnitude.
INT_BUFFER_MAX = 1 << 24


def _error(code, msg):
    """A tessera.Error raised here, shaped like the binding's (TESSERA_EINVAL, ESTATE)."""
    grpc, tcode = {"INVALID_ARGUMENT": (3, 1), "FAILED_PRECONDITION": (9, 4)}[code]
    e = (tessera.InvalidArgument if grpc == 3 else tessera.Error)("%s: %s" % (code, msg))
    e.code, e.grpc_code, e.message, e.tessera_code = code, grpc, msg, tcode
    return e


def _invalid(msg):
    return _error("INVALID_ARGUMENT", msg)


def _flat(t):
    """A tensor's values as a C-contiguous float32 NumPy array (a view where it can be)."""
    a = t.detach()
    if a.device.type != "cpu":
        a = a.cpu()
    if a.dtype != torch.float32:
        a = a.to(torch.float32)
    return np.ascontiguousarray(a.numpy().reshape(-1))


class _Buffer:
    """A module buffer kept equal across ranks: registered as a tensor, assigned by rank 0 at
    every step. Integer buffers go through a float32 shadow."""

    def __init__(self, name, tensor):
        self.name, self.tensor = name, tensor
        self.shadow = None if tensor.dtype == torch.float32 else np.empty(tensor.numel(),
                                                                            np.float32)

    def out(self):
        """Where a pull of it lands."""
        return self.tensor.detach().numpy().reshape(-1) if self.shadow is None else self.shadow

    def values(self):
        """Its values to assign (rank 0), as float32."""
        if self.shadow is None:
            return self.tensor.detach().numpy().reshape(-1)
        v = self.tensor.detach().reshape(-1)
        if v.numel() and int(v.abs().max()) > INT_BUFFER_MAX:
            raise _invalid("buffer %r: %d does not fit float32 exactly (integer buffers are kept "
                           "equal as float32, up to 2^24); attach with broadcast_buffers=False"
                           % (self.name, int(v.abs().max())))
        np.copyto(self.shadow, v.numpy(), casting="unsafe")
        return self.shadow

    def landed(self):
        """After a pull into out(): an integer buffer takes the shadow's values."""
        if self.shadow is not None:
            with torch.no_grad():
                self.tensor.copy_(torch.from_numpy(self.shadow).reshape(self.tensor.shape))


class _RoutedLoad:
    """A module's load_state_dict while it is attached: ParameterServer._load under the
    module's prefix. Not picklable: the module would carry its client along."""

    def __init__(self, ps, prefix):
        self.ps, self.prefix = ps, prefix
        self.__doc__ = "load_state_dict(state_dict, strict=True), through Tessera: " \
            "ParameterServer.load_state_dict."

    def __call__(self, state_dict, strict=True):
        return self.ps._load(state_dict, strict, self.prefix)

    def __reduce__(self):
        raise TypeError("a module attached to Tessera cannot be pickled whole (it would take "
                        "its client along): torch.save(model.state_dict()) or "
                        "torch.save(ps.state_dict()), or pickle it after ps.close()")


#: Floats of optimizer state per parameter element, by optimizer (lib/tensor/optim.c).
STATE_LEN = {"sgd": 0, "momentum": 1, "nesterov": 1, "adam": 2, "adamw": 2,
             "adagrad": 1}


def _optimizer_defaults(spec):
    """{"lr", "weight_decay"} of an optimizer spec ("adamw:lr=0.001,..."), with
    lib/tensor/optim.c's defaults (lr 0.01; weight decay 0, adamw's 0.01)."""
    kind, _, opts = (spec or "momentum").partition(":")
    out = {"lr": 0.01, "weight_decay": 0.01 if kind == "adamw" else 0.0}
    for o in filter(None, opts.split(",")):
        k, _, v = o.partition("=")
        if k in out:
            out[k] = float(v)
    return out


class Optimizer(torch.optim.Optimizer):
    """ps.optimizer: the job's optimizer as torch sees one, for torch.optim.lr_scheduler and
    code that calls optimizer.step() / zero_grad(). Its param_groups hold "lr" and
    "weight_decay" per group; each step sends every parameter's group lr with its pushes
    (tessera_set_lr), so a scheduler's change is part of the next step, on every rank. The
    update itself is the shards' (attach's ``optimizer``); a group's weight_decay is the
    optimizer's or 0. step() is ps.step() (a closure is called first, as torch's are)."""

    def __init__(self, ps, groups, defaults):
        self._ps = ps
        super().__init__(groups, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._ps.step()
        return loss


def _buffers_of(module):
    """The buffers broadcast_buffers keeps equal: every non-None buffer, float32 or integer;
    another float type is refused by name."""
    out = []
    for name, b in module.named_buffers():
        if b is None:
            continue
        if b.device.type != "cpu" or not b.is_contiguous() or \
                (b.is_floating_point() and b.dtype != torch.float32) or b.is_complex():
            raise _invalid("buffer %r: a contiguous float32 or integer CPU tensor expected to "
                           "keep it equal across ranks, got %s on %s; attach with "
                           "broadcast_buffers=False to leave buffers to each rank"
                           % (name, b.dtype, b.device))
        out.append(_Buffer(name, b))
    return out

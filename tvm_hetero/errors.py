"""Errors a user can cause. The CLI prints them as one line; anything else is a bug."""


class HeteroError(Exception):
    """Base class of every user-facing error of tvm_hetero."""


class ModelError(HeteroError):
    """A model cannot be loaded or imported (missing, corrupt, unsupported op, dynamic shape)."""


class DeviceError(HeteroError):
    """A device string is malformed, or a device's runtime is absent."""


class PlacementError(HeteroError):
    """A placement does not match the model's layers or the device set."""


class BuildError(HeteroError):
    """Building a placed module failed."""


class VerificationError(BuildError):
    """A built model's outputs disagree with the independent reference (``compile --verify``):
    the message names the kernel and the rule at fault where they were found."""


class InputError(HeteroError):
    """Inputs given to a compiled model do not match its input signature."""


# How the text of an RPC error marks the remote side's message (the line after it)
_RPC_MARKER = "Error caught from RPC call"
# Lines of an exception's text that are traceback, not message
_TRACEBACK_PREFIXES = ("File ", "at ", "Traceback", "^")


def error_message(err: BaseException, *, with_type: bool = False,
                  max_chars: int | None = None) -> str:
    """An exception's text as one line: the one helper every message of tvm_hetero about a
    caught exception goes through.

    TVM errors put the message last, after a C++ traceback, so the message is the last
    non-empty line that is not a traceback frame; an error raised on an RPC server is the line
    after TVM's "Error caught from RPC call", as ``remote: LINE``.

    Parameters
    ----------
    err : BaseException
        The exception.
    with_type : bool
        Start with the exception's type, ``TypeName: message`` (default False); an exception
        without text is its type's name either way.
    max_chars : int, optional
        Cut the line to this many characters (default: no limit).

    Returns
    -------
    str
        One line.
    """
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(_TRACEBACK_PREFIXES)]
    remote = next((lines[i + 1] for i, ln in enumerate(lines[:-1]) if _RPC_MARKER in ln), None)
    if remote is not None:
        text = f"remote: {remote}"
    elif not lines:
        text = type(err).__name__
    else:
        text = f"{type(err).__name__}: {lines[-1]}" if with_type else lines[-1]
    return text if max_chars is None else text[:max_chars]


def _register_with_tvm_ffi() -> None:
    """Let these errors cross TVM's FFI (e.g. out of a pass) with their own type."""
    import tvm_ffi

    for cls in (HeteroError, ModelError, DeviceError, PlacementError, BuildError,
                VerificationError, InputError):
        tvm_ffi.register_error(cls.__name__, cls)


_register_with_tvm_ffi()

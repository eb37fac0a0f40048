"""The bus's enumerations: message types, and the kinds a message's fields name (an
engine's state, a control action, why a job finished or failed, what a job asks).
FailKind carries its retry rule and the error the client is told."""

from __future__ import annotations

import enum

from coderai.errors import (
    CoderaiError,
    ContextLengthExceeded,
    EngineFailed,
    InvalidRequest,
    ModelFileError,
)


class EngineState(enum.StrEnum):
    """What an engine says it is doing, in each HEARTBEAT."""

    READY = "ready"
    LOADING = "loading"  #: a model load is under way (it serves its other models)


class ControlAction(enum.StrEnum):
    LOAD = "load"  #: args {"model": spec}: load it now
    UNLOAD = "unload"  #: args {"model": id}: unload its idle instances
    CONFIG = "config"  #: args: the settings WELCOME carries, changed while it runs
    SHUTDOWN = "shutdown"  #: leave the bus and exit (for a host that cannot signal it)
    #: a remote engine (which no host can restart) ends its jobs and joins again as a new
    #: incarnation, its models still loaded
    RECONNECT = "reconnect"


class FinishReason(enum.StrEnum):
    STOP = "stop"  #: the model ended, or a stop sequence matched
    LENGTH = "length"  #: max_tokens, or the model's context, is full
    CANCELLED = "cancelled"  #: the front cancelled it
    TOOL_CALLS = "tool_calls"  #: the model called one or more tools


class JobKind(enum.StrEnum):
    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    TOKENIZE = "tokenize"  #: the token ids of a prompt or messages, answered with TOKENS
    DETOKENIZE = "detokenize"  #: the text of prompt_ids, answered with TOKENS


class FailKind(enum.StrEnum):
    """Why an engine failed a job. Next to each: may the job run on another engine, and
    what the client is told (only the front turns these into HTTP)."""

    BUSY = "busy"  #: no free slot (a confused front): retried elsewhere
    BAD_REQUEST = "bad_request"  #: the request's fault (a bad parameter): 400
    CONTEXT_LENGTH = "context_length"  #: the prompt fills the context: 400 with OpenAI's code
    UNSUPPORTED = "unsupported"  #: the model cannot do it (embeddings): 400
    BAD_JOB = "bad_job"  #: the JOB did not make sense to the engine: 503
    MODEL_FILE = "model_file"  #: missing or unreadable model file: 503 model_file_error
    BAD_MODEL = "bad_model"  #: the catalogue entry's options are wrong: 503
    LOAD_FAILED = "load_failed"  #: the model failed to load: 503
    MODEL_ERROR = "model_error"  #: the model failed while generating: 503
    BACKEND_ERROR = "backend_error"  #: a backend bug: 503

    @property
    def retryable(self) -> bool:
        """May a job that produced nothing run on another engine after this?"""
        return self is FailKind.BUSY

    def error(self, engine: str, message: str) -> CoderaiError:
        if self in (FailKind.BAD_REQUEST, FailKind.UNSUPPORTED):
            return InvalidRequest(message)
        if self is FailKind.CONTEXT_LENGTH:
            return ContextLengthExceeded(message)
        if self is FailKind.MODEL_FILE:
            return ModelFileError(message)
        return EngineFailed(f"engine {engine}: {message}")

    @classmethod
    def of(cls, kind: str) -> FailKind:
        """A kind from the wire; one this side does not know is a backend error."""
        try:
            return cls(kind)
        except ValueError:
            return cls.BACKEND_ERROR


class MsgType(enum.IntEnum):
    # engine -> front
    HELLO = 1
    HEARTBEAT = 2
    CHUNKS = 3  #: deltas of many jobs from one engine step (or several merged steps)
    DONE = 4
    FAIL = 5
    BYE = 7
    EMBEDDINGS = 8
    TOKENS = 9  #: a tokenize or detokenize job's answer
    PROMPT = 10  #: a job's prompt admitted (its tokens counted), and how far it is read
    # front -> engine
    WELCOME = 16
    REFUSE = 17  #: HELLO rejected (bad token, protocol version): the engine must exit
    JOB = 18
    CANCEL = 19
    CONTROL = 20
    PING = 21
    HOLD = 22  #: the job's client lags: stop decoding it and keep its output back
    RESUME = 23  #: the client caught up: go on


#: where an image of a JOB's `images` stands in its messages' text, in order (the front
#: writes it for a model with a vision projector; the engine reads the images there)
IMAGE_MARKER = "<__coderai_image__>"

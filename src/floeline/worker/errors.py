"""The errors the worker's REST API answers with. Each carries the HTTP status Kafka
Connect answers for that case, so the REST server turns any of them into Connect's
error body, {"error_code": status, "message": str(exc)}, without knowing who raised it
(the herder, the offsets module or the server itself)."""

from floeline.errors import FloelineError


class RestError(FloelineError):
    """A request the worker refuses; `status` is the HTTP status Connect answers."""

    status: int = 500


class BadRequest(RestError):
    """Malformed body, invalid config, or an operation the connector's state forbids."""

    status = 400


class NotFound(RestError):
    """No such connector, task, plugin or path."""

    status = 404


class AlreadyExists(RestError):
    """A connector of that name exists already."""

    status = 409


class Conflict(RestError):
    """The request clashes with the worker's state (Connect's 409 for a rebalance etc.)."""

    status = 409

"""Free TCP ports on the loopback interface."""
import socket


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

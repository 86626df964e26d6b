//! Integration tests: real holdfast, real origins, real sockets.

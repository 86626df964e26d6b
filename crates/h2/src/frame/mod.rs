//! HTTP/2 frames (RFC 9113 sections 4 and 6): the 9-byte header, each type's payload
//! decoded with the checks a receiver must make, and encoders.

//! HPACK (RFC 7541): header blocks decoded into fields and fields encoded into blocks,
//! with the static and dynamic tables and Huffman coding.

"""The artifact file format: canonical msgpack manifest + 64-byte-aligned raw tensor section.

``canonical`` encodes and decodes canonical msgpack (hostile input welcome); ``container``
holds the fixed header, the signature block and the mapped reader; ``tensors`` the section
layout, hashing and zero-copy views; ``manifest`` the schema and the compatibility check.

This package defines bytes and their consistency only. Whether an artifact is *trusted*
(signatures, keys, thresholds, revocation, rollback, expiry, audits) is decided by the host:
``plugin_host.artifacts``.
"""

from abi.artifact.canonical import DEFAULT_DECODE_LIMITS, DecodeLimits, decode, encode
from abi.artifact.container import (ALIGNMENT, DEFAULT_LIMITS, FORMAT_VERSION, HEADER_SIZE,
                                    MAGIC, SIGNED_CONTEXT, ArtifactFile, Header, Limits,
                                    SignatureEntry, align, atomic_write, copy_chunks,
                                    create_new, decode_signatures,
                                    encode_signatures, file_prefix, is_key_id, layout,
                                    parse_header, signed_message)
from abi.artifact.manifest import (MAX_GOLDEN_CASES, GoldenCase, Manifest, ResetConditions,
                                   Tolerance, check_compatible, check_graph_dict, check_manifest,
                                   derive_roles, golden_tensor_name, graph_digest,
                                   layers_summary, make_manifest, parse_version)
from abi.artifact.tensors import (ROLES, TensorEntry, plan_tensors, root_digest, tensor_views,
                                  verify_section, write_section)

__all__ = [
    # canonical msgpack
    "encode", "decode", "DecodeLimits", "DEFAULT_DECODE_LIMITS",
    # the container
    "MAGIC", "FORMAT_VERSION", "HEADER_SIZE", "ALIGNMENT", "SIGNED_CONTEXT", "Limits",
    "DEFAULT_LIMITS", "Header", "SignatureEntry", "ArtifactFile", "align", "layout",
    "parse_header", "encode_signatures", "decode_signatures", "signed_message", "file_prefix",
    "atomic_write", "create_new", "copy_chunks", "is_key_id",
    # tensors
    "ROLES", "TensorEntry", "plan_tensors", "write_section", "root_digest", "verify_section",
    "tensor_views",
    # the manifest
    "Manifest", "ResetConditions", "Tolerance", "GoldenCase", "check_manifest",
    "check_graph_dict", "check_compatible", "make_manifest", "graph_digest", "derive_roles",
    "layers_summary", "golden_tensor_name", "parse_version", "MAX_GOLDEN_CASES",
]

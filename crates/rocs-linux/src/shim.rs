//! Client of the kernel shim `/dev/rocs_shim` (being built).

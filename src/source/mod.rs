//! Dataset sources (folder, file list, tar shards) and the header index.

//! Real-kernel tests of the loader and the programs.

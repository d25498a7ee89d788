//! The ebpf mode's kernel edge: kproxy's BPF programs, loaded, pinned and
//! attached, and their maps written. The programs' sources are under
//! `programs/`; `programs/kproxy_maps.h` is the map layout the planner
//! (`kproxy-ebpf`) mirrors.

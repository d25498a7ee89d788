//! Real-kernel tests of the loader and the programs. Each test builds its
//! own network namespaces (kproxy-sandbox), its own cgroup under the
//! cgroup2 mount and its own bpffs in a temporary directory, and removes
//! them on drop (also on panic). Without root they skip, unless
//! `KPROXY_REQUIRE_NETNS=1`, where they fail.

mod child;
mod hash;
mod lifecycle;
mod object;
mod sock;
mod sock_rev;
mod support;
mod tc;

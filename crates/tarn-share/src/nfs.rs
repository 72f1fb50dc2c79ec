//! `sharenfs`: Linux exports(5) options as OpenZFS on Linux accepts them.

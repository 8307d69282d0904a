//! Journal paths, names, sentinels and shell command templates (spec D, E). Pure.

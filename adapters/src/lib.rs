//! The kube adapter: watch events in, API calls out.

// engine-level tests

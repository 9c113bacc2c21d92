"""The compiled module under AddressSanitizer and UBSan, fuzzed through `sluice run`'s own path."""

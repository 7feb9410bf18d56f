// Package memory is a [dedup.Store] that keeps its leases and done-marks in
// the process's memory: for tests, demos and single-process tools. Nothing
// survives a restart and nothing is shared between processes, so it
// deduplicates only the deliveries one process sees while it runs; use
// dedup/postgres or dedup/redis for a service with replicas.
package memory

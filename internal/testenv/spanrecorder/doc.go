// Package spanrecorder is a TracerProvider for tests that records the
// spans warren starts: their names, kinds, parents, status and events.
// It stands in for the OpenTelemetry SDK's tracetest recorder, so that the
// library's go.mod does not carry the SDK into every importer's module
// graph for the sake of its tests. It samples every span and gives each a
// random trace and span id, as the SDK's default does.
package spanrecorder

// Package httpserver builds every HTTP server warren starts (health and
// metrics endpoints, the example receivers), so that each has the same
// bounds on slow clients: a client that sends half a request, or reads
// its answer slowly, or keeps an idle connection open, is disconnected
// instead of holding a connection and a goroutine forever.
package httpserver

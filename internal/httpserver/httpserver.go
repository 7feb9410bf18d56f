package httpserver

import (
	"net/http"
	"time"
)

// The bounds New sets. They are generous for what warren serves (small
// health answers, webhook bodies of a few MB, a test receiver that answers
// slowly on purpose) and short against a client that stalls.
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds the time from the end of the request headers
	// to the end of the answer, so it includes the handler's time.
	WriteTimeout = time.Minute
	// IdleTimeout bounds how long a kept-alive connection waits for the
	// next request.
	IdleTimeout = 2 * time.Minute
)

// New returns a server for h on addr with every timeout set. Start it with
// ListenAndServe, or Serve on a listener of your own.
func New(addr string, h http.Handler) *http.Server {
	return bounded(addr, h, ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout)
}

func bounded(addr string, h http.Handler, readHeader, read, write, idle time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: readHeader,
		ReadTimeout:       read,
		WriteTimeout:      write,
		IdleTimeout:       idle,
	}
}

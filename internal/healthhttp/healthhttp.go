// Package healthhttp serves the /healthz and /readyz endpoints of warren's
// long-running parts (the consumer, the relay) in one shape: the current
// health as JSON, 200 when the probe passes, 503 when it does not.
package healthhttp

import (
	"encoding/json"
	"net/http"
)

// Handler serves GET /healthz, passing when alive(h), and GET /readyz,
// passing when ready(h), where h is a fresh health() at every request.
func Handler[H any](health func() H, alive, ready func(H) bool) http.Handler {
	mux := http.NewServeMux()
	serve := func(pass func(H) bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			h := health()
			w.Header().Set("Content-Type", "application/json")
			if !pass(h) {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			json.NewEncoder(w).Encode(h)
		}
	}
	mux.HandleFunc("GET /healthz", serve(alive))
	mux.HandleFunc("GET /readyz", serve(ready))
	return mux
}

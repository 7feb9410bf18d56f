package console

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/internal/httpserver"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

// Server is the console. Create it with [New]; serve it with
// [Server.Serve], or mount [Server.Handler] on a server of your own (tests
// do, on httptest.NewServer).
type Server struct {
	cfg     Config
	secret  []byte // keys the CSRF MACs; new with every process
	pages   map[string]*template.Template
	handler http.Handler
	tls     *tls.Config // nil: plain HTTP

	broker       *broker
	inventory    Inventory
	inventoryErr string // why there is no inventory

	outbox  *outbox.Table // nil without a database
	db      *pgxpool.Pool // nil without a database
	dbShown string        // the database URL, password masked

	plans    *store[plan]
	outcomes *store[*job]
	sessions *store[struct{}] // logged-in sessions, by cookie value
	// signatures are the failure signatures of the groups shown, by
	// group id: the forms post the id (see filterFromForm).
	signatures *store[signature]
	logins     *loginLimiter
	jobs       sync.WaitGroup // confirmed actions running

	// base is the context actions run in: not a request's, so that a
	// closed tab does not cut a replay short, but ended by Close.
	base      context.Context
	closeBase context.CancelFunc
	closeOnce sync.Once
}

// New returns a console for cfg. It connects to nothing yet: the broker is
// dialled, and the database reached, when a page first needs them.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		secret:     make([]byte, 32),
		broker:     &broker{url: cfg.AMQPURL},
		inventory:  cfg.Inventory,
		plans:      newStore[plan](1000, 15*time.Minute),
		outcomes:   newStore[*job](1000, 24*time.Hour),
		sessions:   newStore[struct{}](sessions, sessionTTL),
		signatures: newStore[signature](10000, time.Hour),
		logins:     newLoginLimiter(),
	}
	rand.Read(s.secret)
	if cfg.TLSCertFile != "" {
		// Loaded now, so that a wrong file is an error at start, not at
		// the first request.
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("console: TLS certificate: %w", err)
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if s.inventory == nil {
		inv, err := inventory.New(cfg.AMQPURL, cfg.ManagementURL)
		if err != nil {
			// The DLQ pages work without it; the overview says why it
			// cannot list the consumers.
			s.inventoryErr = redact.Secrets(err.Error())
		} else {
			s.inventory = inv
		}
	}
	if s.pages, err = parseTemplates(); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if cfg.DatabaseURL != "" {
		if s.outbox, err = outbox.Open(cfg.Table, outbox.Options{Schema: cfg.Schema}); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("console: database URL: %w", redact.Error(err, cfg.DatabaseURL))
		}
		if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
			pcfg.ConnConfig.RuntimeParams["application_name"] = "warren console"
		}
		pcfg.MaxConns = 4
		if s.db, err = pgxpool.NewWithConfig(context.Background(), pcfg); err != nil {
			return nil, fmt.Errorf("console: database: %w", redact.Error(err, cfg.DatabaseURL))
		}
		s.dbShown = redact.URL(cfg.DatabaseURL)
	}
	s.base, s.closeBase = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s, nil
}

// routes is every page and action, behind the security layers: headers on
// everything, then the Host check against DNS rebinding, then
// requests other sites made, then authentication, then CSRF.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /login", s.login)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)

	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /dlq", s.openQueue)
	mux.HandleFunc("GET /dlq/{queue}", s.dlqGroups)
	mux.HandleFunc("GET /dlq/{queue}/group/{group}", s.dlqGroup)
	mux.HandleFunc("GET /dlq/{queue}/message", s.dlqMessage)
	mux.HandleFunc("GET /outbox", s.outboxPage)
	mux.HandleFunc("GET /results/{id}", s.result)

	for _, op := range []string{opReplay, opPurge, opExport} {
		mux.HandleFunc("POST /dlq/{queue}/"+op, s.readOnly(s.dlqAction(op)))
	}
	mux.HandleFunc("POST /outbox/redrive", s.readOnly(s.redrive))
	return securityHeaders(s.checkHost(crossSite(s.requireAuth(s.csrf(mux)))))
}

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve listens on Config.Listen and serves until ctx ends, then shuts
// down (letting requests in progress finish, for a while) and closes.
func (s *Server) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("console: listen: %w", err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is Serve on a listener of the caller's.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	defer s.Close()
	if err := s.cfg.checkBound(ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	srv := httpserver.New(ln.Addr().String(), s.handler)
	scheme := "http"
	if s.tls != nil {
		// Every connection is TLS: a plain HTTP request fails its
		// handshake rather than being served.
		ln, scheme = tls.NewListener(ln, s.tls), "https"
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.cfg.Logger.Info("warren console serving", "url", scheme+"://"+ln.Addr().String()+"/", "read_only", s.cfg.ReadOnly)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdown)
	s.closeBase() // actions still running stop safely (dlqtool's guarantee)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Close ends running actions, waits until they have stopped (each leaves
// what it did not get to where it was), and closes the broker connection
// and the database pool.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.closeBase()
		s.jobs.Wait()
		s.broker.close()
		if s.db != nil {
			s.db.Close()
		}
	})
}

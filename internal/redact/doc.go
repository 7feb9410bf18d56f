// Package redact keeps passwords out of logs, errors and command output.
// warren's packages hold connection strings for RabbitMQ, Postgres and
// Redis, in URL form (scheme://user:password@host/…) or Postgres's
// key=value form, and any library error may quote one back; everything
// that prints a connection string or an error that may contain one goes
// through here.
package redact

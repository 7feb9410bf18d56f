// Package redact keeps secrets out of logs, errors, headers and command
// output.
//
// [Secrets] is the one redaction step for free text that leaves the
// process: it masks URL passwords (also in URLs that do not parse), values
// of secret-looking parameters and Authorization credentials, knowing
// nothing of the text's origin. Handler errors go through it before they
// become a dead-letter header, a log line or a span status.
//
// warren's packages also hold connection strings for RabbitMQ, Postgres and
// Redis, in URL form (scheme://user:password@host/…) or Postgres's
// key=value form, and a library error may quote the bare password of one;
// [Text] and [Error] mask those given the connection strings, then apply
// [Secrets], and [URL] prints a connection string.
package redact

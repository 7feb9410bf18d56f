module github.com/warrenmq/warren

go 1.26.8

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/rabbitmq/amqp091-go v1.16.0
)

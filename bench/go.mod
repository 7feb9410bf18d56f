module github.com/warrenmq/warren/bench

go 1.26.8

require (
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/warrenmq/warren v0.0.0
)

require github.com/cenkalti/backoff/v4 v4.3.0 // indirect

replace github.com/warrenmq/warren => ../

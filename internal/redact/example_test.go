package redact_test

import (
	"fmt"

	"github.com/warrenmq/warren/internal/redact"
)

func ExampleSecrets() {
	fmt.Println(redact.Secrets("POST https://bob:s3cr3t@hooks.example/x?token=abc&v=1: 500"))
	fmt.Println(redact.Secrets(`parse "amqp://guest:50%off@mq/": invalid URL escape "%of"`))
	// Output:
	// POST https://bob:xxxxx@hooks.example/x?token=xxxxx&v=1: 500
	// parse "amqp://guest:xxxxx@mq/": invalid URL escape "xxxxx"
}

func ExampleSecretName() {
	for _, name := range []string{"x-api-password", "X-Auth-Token", "x-warren-error", "content-type"} {
		fmt.Println(name, redact.SecretName(name))
	}
	// Output:
	// x-api-password true
	// X-Auth-Token true
	// x-warren-error false
	// content-type false
}

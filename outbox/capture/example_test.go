package capture_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/outbox/capture"
)

// Capture Plane's issues table as workitem events, leaving the large
// description out, and record rather than fail when the outbox refuses
// an event.
func ExampleInstall() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	res, err := capture.Install(ctx, pool, capture.Spec{
		Table:                "issues",
		EntityType:           "issue",
		EventPrefix:          "workitem",
		Exclude:              []string{"description_html", "description_binary", "description", "description_stripped"},
		WorkspaceColumn:      "workspace_id",
		ProjectColumn:        "project_id",
		InitiatorTypeSetting: "plane.initiator_type",
		OnFailure:            capture.Record,
	})
	if err != nil {
		log.Fatal(err)
	}
	if res.Applied {
		fmt.Printf("%s: capture version %d installed\n", res.Name, res.Version)
	}
}

// Bad specs are refused before anything reaches the database.
func ExampleGenerate() {
	_, err := capture.Generate(context.Background(), nil, capture.Spec{Table: `issues"; DROP TABLE issues; --`})
	fmt.Println(err)
	// Output:
	// invalid capture spec: table "issues\"; DROP TABLE issues; --" must be name or schema.name, each matching ^[a-z_][a-z0-9_]*$
}

// Capture Plane's issues table so that the events are the ones Plane's own
// triggers write: its event names, payload shapes and enrichment.
func ExamplePlaneIssues() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	spec, err := capture.PlaneIssues(ctx, pool, "public.issues")
	if err != nil {
		log.Fatal(err) // not Plane's schema: a table its triggers read is missing
	}
	spec.Outbox = "warren_outbox"
	if _, err := capture.Install(ctx, pool, spec); err != nil {
		log.Fatal(err)
	}
}

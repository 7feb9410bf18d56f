package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/warrenmq/warren/contract"
)

var contractsCommand = command{name: "contracts", summary: "check a change to the event contracts (CI); write the stream's AsyncAPI document", run: runContracts}

// contractsOptions are the flags of 'warren contracts'.
type contractsOptions struct {
	mode     string
	asyncapi asyncapiOptions
}

// contractsCall is one run of a 'warren contracts' verb.
type contractsCall struct {
	env  *cliEnv
	opts *contractsOptions
	args []string
}

// contractsVerbs are `warren contracts`'s subcommands.
var contractsVerbs = &subcommands[contractsOptions, *contractsCall]{
	command: "contracts",
	verbs: []subcommand[contractsOptions, *contractsCall]{{
		name: "check", args: "OLD_DIR NEW_DIR", summary: "fail on a change to the contracts that breaks compatibility",
		about: "Compare two sets of event contracts (each DIR/TYPE/VERSION.json, a JSON Schema of payload.data, as contract.Set.WriteDir writes them), e.g. the main branch's and a change's, contract by contract, under a compatibility mode as Schema Registry defines them. Each break is printed on a line of its own, naming the contract, the field and who can no longer read what. A contract that is new in NEW_DIR breaks nothing; one that is gone does.\n\nExit status: 0 no break; 1 a break, or contracts that cannot be read; 2 the command line was wrong.",
		examples: []string{
			"git worktree add /tmp/main main && warren contracts check /tmp/main/contracts contracts",
			"warren contracts check --mode full old/contracts contracts",
		},
		flags: func(fs *flagSet, o *contractsOptions) {
			fs.String(&o.mode, "mode", "backward|forward|full", "the compatibility the change must keep: backward (a consumer on the new contracts reads events written under the old: deploy consumers first), forward (a consumer on the old reads events written under the new: deploy producers first), full (both)", string(contract.Backward))
		},
		run: runContractsCheck,
	}, asyncapiVerb},
}

func runContracts(ctx context.Context, env *cliEnv, args []string) error {
	p, err := contractsVerbs.parse(env, args)
	if err != nil {
		return err
	}
	return p.verb.run(ctx, &contractsCall{env: env, opts: p.opts, args: p.args})
}

func runContractsCheck(_ context.Context, c *contractsCall) error {
	if len(c.args) != 2 {
		return usagef("check: want two directories, the old contracts and the changed ones, got %d arguments", len(c.args))
	}
	mode, err := contract.ParseMode(c.opts.mode)
	if err != nil {
		return usagef("--mode: %v", err)
	}
	// The change that adds the first contracts has none before it.
	old, err := contract.NewSet()
	if _, statErr := os.Stat(c.args[0]); !errors.Is(statErr, fs.ErrNotExist) {
		old, err = contract.LoadDir(c.args[0])
	} else {
		fmt.Fprintf(c.env.stdout, "%s does not exist: no contracts before this change\n", c.args[0])
	}
	if err != nil {
		return fmt.Errorf("the old contracts (%s): %w", c.args[0], err)
	}
	changed, err := contract.LoadDir(c.args[1])
	if err != nil {
		return fmt.Errorf("the changed contracts (%s): %w", c.args[1], err)
	}
	breaks := contract.Compare(old, changed, mode)
	for _, b := range breaks {
		fmt.Fprintf(c.env.stdout, "BREAK %s\n", b)
	}
	fmt.Fprintf(c.env.stdout, "%d contracts before, %d after, compared under %s compatibility: %d breaking changes\n",
		len(old.Contracts()), len(changed.Contracts()), mode, len(breaks))
	if len(breaks) > 0 {
		return fmt.Errorf("%d breaking changes under %s compatibility", len(breaks), mode)
	}
	return nil
}

// Command sluice is the userspace IPsec data plane's command line. It only
// calls cli.Run; every command lives in package cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

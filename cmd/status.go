package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/semaphore"
)

func newCmdStatus(common *commonOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [flags] KEY...",
		Short: "Show the holders and capacity of keys",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("no key given: semrun status [flags] KEY...")
			}
			for _, k := range args {
				if err := semaphore.CheckKey(k); err != nil {
					return usageErrorf("key %q: %v", k, err)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, keys []string) error {
			if err := common.validate(); err != nil {
				return err
			}
			store, err := semaphore.NewRedis(semaphore.RedisOptions{
				URL: common.redisURL, Prefix: common.prefix, ConnectTimeout: common.connectTimeout,
			})
			if err != nil {
				return usageErrorf("%s: %v", common.sources.name("redis"), err)
			}
			defer store.Close()
			st, err := store.Status(cmd.Context(), keys)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printStatus(w io.Writer, keys []semaphore.KeyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, k := range keys {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		capacity := "?"
		if k.Capacity > 0 {
			capacity = fmt.Sprint(k.Capacity)
		}
		fmt.Fprintf(tw, "key %q: %d held, capacity %s\n", k.Key, k.Held, capacity)
		if len(k.Holders) == 0 {
			continue
		}
		fmt.Fprintln(tw, "  HOST\tPID\tCOMMAND\tPERMITS\tAGE\tEXPIRES IN\tTOKEN")
		for _, h := range k.Holders {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%v\t%v\t%d\n", h.Host, h.PID, h.Command, h.Permits,
				h.Age.Round(time.Millisecond), h.ExpiresIn.Round(time.Millisecond), h.Token)
		}
	}
	return tw.Flush()
}

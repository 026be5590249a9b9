module github.com/sluicegw/sluice

go 1.26.0

require (
	github.com/pelletier/go-toml/v2 v2.4.3
	golang.org/x/crypto v0.59.0
)

require (
	github.com/gopacket/gopacket v1.7.7 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

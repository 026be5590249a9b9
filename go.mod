module github.com/sluicegw/sluice

go 1.26.0

require (
	github.com/pelletier/go-toml/v2 v2.4.3
	golang.org/x/crypto v0.59.0
)

require golang.org/x/sys v0.50.0 // indirect

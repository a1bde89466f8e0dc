module github.com/sandprobe/sandprobe

go 1.26

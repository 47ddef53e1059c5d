module primus.dev/nodeimages

go 1.22

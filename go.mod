module deeplink

go 1.24.0

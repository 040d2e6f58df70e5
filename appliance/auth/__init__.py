"""Authentication for the admin page: password hashing and the password file."""
